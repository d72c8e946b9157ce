"""One rule for "is this a local path or a Hub id" (gspo_trl.config.hub_ids), used by `train`'s
preflight, `eval`/`filter` and data loading alike."""

from __future__ import annotations

import pytest

from gspo_trl.config.hub_ids import looks_like_local_path
from gspo_trl.config.recipe import load_recipe
from gspo_trl.core.errors import ModelNotFoundError, RecipeError
from gspo_trl.eval.generation import resolve_model_dir
from gspo_trl.training.preflight import check_model_path

NAMES = [
    # (name, only a local path)
    ("Qwen/Qwen3-1.7B", False),
    ("tiny", False),
    ("open-r1/DAPO-Math-17k-Processed", False),
    ("org/model", False),  # could be either: the directory is tried first, then the Hub
    ("./model", True),
    ("../runs/x", True),
    ("/abs/model", True),
    ("~/model", True),
    ("runs/qwen/checkpoint-8", True),
    (".hidden", True),  # the two callers disagreed here before
    ("my model", True),
    ("", True),
]


@pytest.mark.parametrize(("name", "local"), NAMES, ids=[n or "<empty>" for n, _ in NAMES])
def test_local_path_or_hub_id(name: str, local: bool) -> None:
    assert looks_like_local_path(name) is local


@pytest.mark.parametrize("name", ["runs/qwen/checkpoint-8", ".hidden", "~/no-such-model"])
def test_train_and_eval_refuse_a_missing_local_model_alike(name: str) -> None:
    with pytest.raises(RecipeError, match="does not exist"):
        check_model_path(load_recipe(None, {"model.name_or_path": name, "rewards": ["math"]}))
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        resolve_model_dir(name)
