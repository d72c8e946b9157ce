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
