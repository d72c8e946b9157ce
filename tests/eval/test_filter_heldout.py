"""`gspo-trl filter` keeps the held-out rows out of what it writes, and says why when it keeps nothing."""

from __future__ import annotations

import json

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


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
