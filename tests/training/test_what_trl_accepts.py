"""Issue 44 item 11: what TRL's GRPOTrainer accepts, GSPOTrainer accepts too, or refuses in one line.

One real GSPOTrainer step takes a streaming dataset (the banner took its len()), a non-LoRA PEFT
config (the model line read LoRA's target_modules) and a reward that returns None on every
completion (TRL logs None for its mean; the step line formatted it as a number). CISPO with
GSPO's clip range is refused: CISPO reads epsilon_high as its cap on the weight itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig
from tests._gspo_helpers import length_reward, single_torch_thread, tiny_model_dir

__all__ = ["single_torch_thread"]


def judged_elsewhere(completions: list[str], **_: Any) -> list[float | None]:
    """TRL's multi-task pattern: None where another reward judges the sample (here: all of them)."""
    return [None] * len(completions)


def test_streaming_data_prompt_tuning_and_an_all_none_reward_train_a_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from peft import PromptTuningConfig
    from trl import GRPOTrainer

    from gspo_trl.training.trainer import GSPOTrainer

    rows = Dataset.from_list([{"prompt": f"add {i} and {i + 3}"} for i in range(16)]).to_iterable_dataset()
    args = GSPOConfig(
        output_dir=str(tmp_path / "out"),
        report_to="none",
        max_completion_length=8,
        num_generations=4,
        per_device_train_batch_size=4,
        steps_per_generation=2,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
    )
    trainer = GSPOTrainer(
        model=str(tiny_model_dir(tmp_path)),
        reward_funcs=[length_reward, judged_elsewhere],
        args=args,
        train_dataset=rows,
        peft_config=PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2),
    )
    assert isinstance(trainer, GRPOTrainer)
    trainer.train()
    out = capsys.readouterr().out
    assert "  model    " in out and "PEFT PROMPT_TUNING" in out, out
    assert "  data     streaming training rows" in out, out
    step = next(line for line in out.splitlines() if line.startswith("step 1/1"))
    assert "[length_reward 0." in step and "judged_elsewhere n/a]" in step, step


@pytest.mark.parametrize("epsilon_high", [None, 4e-4, 0.5])
def test_cispo_with_a_half_width_for_its_cap_is_refused(tmp_path: Path, epsilon_high: float | None) -> None:
    kwargs = {} if epsilon_high is None else {"epsilon_high": epsilon_high}
    with pytest.raises(RecipeError, match="with loss_type 'cispo' is CISPO's cap on the importance weight"):
        GSPOConfig(output_dir=str(tmp_path), importance_sampling_level="token", loss_type="cispo", **kwargs)


def test_cispo_with_its_own_cap_is_accepted(tmp_path: Path) -> None:
    config = GSPOConfig(
        output_dir=str(tmp_path), importance_sampling_level="token", loss_type="cispo", epsilon_high=5.0
    )
    assert config.epsilon_high == 5.0
