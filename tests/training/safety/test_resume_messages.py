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
    assert not [m for m in messages if "mid rollout batch" in m], messages  # step 4: a boundary


@pytest.mark.slow
def test_resume_mid_rollout_batch_says_how_many_steps_are_regenerated(tmp_path, caplog) -> None:
    """Stopped at step 2 of a 4-update rollout batch, the resumed run regenerates steps 3-4's
    data; the console said nothing of it."""
    import logging

    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import train_recipe

    path = ROOT / "recipes" / "tiny" / "reversal.yaml"
    fast = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 6}
    fast |= {"data.num_rows": 64, "data.eval_size": 0, "output_dir": str(tmp_path)}
    fast |= {"save_strategy": "steps", "save_steps": 2, "steps_per_generation": 4}

    def recipe(max_steps: int):
        loaded = load_recipe(path, {**fast, "max_steps": max_steps})
        loaded.heldout = None
        return loaded

    train_recipe(recipe(2))
    with caplog.at_level(logging.INFO):
        train_recipe(recipe(4), resume=True)
    notes = [r.getMessage() for r in caplog.records if "mid rollout batch" in r.getMessage()]
    assert len(notes) == 1, [r.getMessage() for r in caplog.records]
    assert (
        "step 2 is 2 of the 4 optimizer steps of a rollout batch: its last 2 step(s) are regenerated"
        in (notes[0])
    )
    assert "save_steps a multiple of 4" in notes[0]


@pytest.mark.parametrize(
    ("accumulation", "global_step", "expected"),
    [
        (1, 8, None),
        (1, 5, "step 5 is 1 of the 4 optimizer steps of a rollout batch: its last 3 step(s)"),
        (2, 1, "step 1 is 1 of the 2 optimizer steps of a rollout batch: its last 1 step(s)"),
        (8, 1, None),  # every step spans a whole rollout batch (on-policy)
    ],
)
def test_mid_batch_resume_note(accumulation, global_step, expected) -> None:
    from gspo_trl.config.batch import RolloutBatch
    from gspo_trl.training.probes.resume_warnings import mid_batch_resume_note

    note = mid_batch_resume_note(RolloutBatch(8, 1, 4, 4, accumulation), global_step)
    assert note == expected if expected is None else note.startswith(expected), note


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

    from gspo_trl.training.probes.resume_warnings import MISSING_KEYS_PREFIX, TiedWeightsFilter
    from tests._gspo_helpers import tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(tmp_path))
    record = logging.LogRecord("transformers.trainer", logging.WARNING, "", 0, "", None, None)
    record.msg = f"{MISSING_KEYS_PREFIX}{missing}."
    assert TiedWeightsFilter(model).filter(record) is not dropped
