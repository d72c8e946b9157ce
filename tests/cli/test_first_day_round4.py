"""Issue 44's refusals, each made by `validate` and `train` alike in one line before any model
loads: a folder named like the built-in model, a completion longer than the tiny model's positions,
a hub push without network."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._cli_helpers import refused_alike
from tests.cli.test_bad_input import _recipe


def test_a_folder_named_tiny_is_not_silently_swapped_for_the_built_in_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gspo-trl tiny-model tiny` then `name_or_path: tiny`: the run built a fresh model instead."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    message = refused_alike([str(_recipe(tmp_path))], capsys)
    assert "model.name_or_path: 'tiny' names both the built-in tiny CPU model and the folder" in message
    assert "'./tiny'" in message


def test_the_built_in_model_gets_the_position_check_before_it_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ./tiny the prompt-length check refused at once; with `tiny` (not built yet) train
    generated past the model's 512 positions for minutes."""
    message = refused_alike([str(_recipe(tmp_path)), "--max_completion_length", "4096"], capsys)
    assert message == (
        "error: max_completion_length: 4096 leaves no room for a prompt in the built-in tiny model's "
        "512 positions (max_position_embeddings); give less than 512"
    )


@pytest.mark.parametrize(
    ("offline", "token", "words"),
    [
        ("1", "hf_unused", "but HF_HUB_OFFLINE=1 forbids the hub; unset it, or --push_to_hub false"),
        ("0", None, "needs a hub token with write access: `hf auth login` or HF_TOKEN"),
    ],
    ids=["HF_HUB_OFFLINE=1", "no token"],
)
def test_a_hub_push_that_cannot_push_is_refused_before_the_model_loads(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    offline: str,
    token: str | None,
    words: str,
) -> None:
    """train loaded the model, then died in transformers' create_repo: 98 lines of httpx.ConnectError."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline == "1")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    argv = [str(_recipe(tmp_path)), "--push_to_hub", "true", "--hub_model_id", "me/x"]
    message = refused_alike(argv, capsys)
    assert message.startswith("error: push_to_hub: true (hub_model_id 'me/x')") and words in message, message


def test_train_asks_the_hub_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub that cannot be reached (a closed local port here): one line from train, exit 2."""
    from huggingface_hub import constants

    from gspo_trl.cli.main import main as gspo_trl_main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TOKEN", "hf_unused")
    argv = [str(_recipe(tmp_path)), "--push_to_hub", "true", "--hub_model_id", "me/x"]
    assert gspo_trl_main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "but the hub (http://127.0.0.1:9) cannot be reached (ConnectError" in line, line
    assert not (tmp_path / "out").exists()  # refused before the run claimed its folder


def test_gspo_config_refuses_an_upper_half_width_below_the_lower(tmp_path: Path) -> None:
    from gspo_trl.core.errors import RecipeError
    from gspo_trl.training.config import GSPOConfig

    with pytest.raises(RecipeError, match=r"epsilon_high: 0.0003 is below epsilon 0.0004: .* swap them"):
        GSPOConfig(output_dir=str(tmp_path), epsilon=4e-4, epsilon_high=3e-4)


def test_a_mistyped_reward_parameter_gets_a_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _recipe(tmp_path)
    recipe.write_text(
        recipe.read_text().replace(
            "rewards: [gspo_trl.data.synthetic:digit_reversal_reward]",
            "rewards:\n  - {name: code, timout: 5}",
        )
    )
    message = refused_alike([str(recipe)], capsys)
    assert "has no parameter 'timout' (did you mean 'timeout'?)" in message, message


def test_every_missing_column_in_one_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rewards[0] and heldout.reward both read `solution`: main named only the first."""
    import json

    rows = tmp_path / "answers.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": f"reverse {n}", "answer": str(n)[::-1]}) + "\n" for n in range(64))
    )
    recipe = _recipe(tmp_path)
    synthetic = "data: {path: synthetic:reversal, num_rows: 64, solution_column: solution, eval_size: 16}"
    recipe.write_text(recipe.read_text().replace(synthetic, f"data: {{path: {rows}, eval_size: 16}}"))
    message = refused_alike([str(recipe)], capsys)
    reward, grader = "gspo_trl.data.synthetic:digit_reversal_reward", "gspo_trl.data.synthetic:exact_match"
    assert f"rewards[0] ({reward}) needs dataset column(s) ['solution']; " in message, message
    assert f"heldout.reward ({grader}) needs dataset column(s) ['solution'], but the data has" in message


def test_lora_at_a_full_fine_tuning_rate_is_warned_and_bf16_on_cpu_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import gspo_config
    from gspo_trl.training.preflight import preflight

    lora = {"model.lora": {"r": 8}, "learning_rate": 1e-6, "output_dir": str(tmp_path / "out")}
    with caplog.at_level(logging.INFO, logger="gspo_trl"):
        preflight(load_recipe(_recipe(tmp_path), lora))
        config = gspo_config(load_recipe(_recipe(tmp_path), {"model.dtype": "bfloat16"}))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "model.lora with learning_rate 1e-06, a full fine-tuning rate: LoRA usually wants ~10x it "
        "(recipes/qwen3-4b: 1e-6 full, 1e-5 LoRA); try --learning_rate 1e-05"
    ]
    assert str(config.model_init_kwargs["dtype"]) == "float32"  # on this CPU: loaded as float32, said at INFO
    assert any("bfloat16 is loaded as float32 on CPU" in r.getMessage() for r in caplog.records)
