"""What a resume says: where it resumes, and not that tied weights are missing."""

from __future__ import annotations

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT


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
