"""`gspo-trl eval`: the k it refuses for given completions, and where it writes its results."""

from __future__ import annotations

import json

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


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
