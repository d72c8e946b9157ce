"""Shared by the refusal tables: run `validate` and `train` on the same argv and compare, and ask
GSPOConfig the same question."""

from __future__ import annotations

import pytest

from gspo_trl.cli.main import main as gspo_trl_main


def refused_alike(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run validate and train on argv; both must exit 2 with the same one-line error."""
    messages = {}
    for command in ("validate", "train"):
        assert gspo_trl_main([command, *argv]) == 2, f"{command} accepted {argv}"
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, err
        messages[command] = lines[0]
    assert messages["validate"] == messages["train"]
    return messages["train"]


def refused_by_all_three(
    argv: list[str], fields: dict, capsys: pytest.CaptureFixture[str], output_dir: str
) -> tuple[str, str]:
    """`validate` and `train` refuse argv alike (`refused_alike`) and GSPOConfig refuses `fields`
    in one line: (the command line's error, GSPOConfig's message)."""
    from gspo_trl.core.errors import RecipeError
    from gspo_trl.training.config import GSPOConfig

    line = refused_alike(argv, capsys)
    with pytest.raises(RecipeError) as error:
        GSPOConfig(output_dir=output_dir, use_cpu=True, report_to="none", **fields)
    message = str(error.value)
    assert "\n" not in message, message
    return line, message
