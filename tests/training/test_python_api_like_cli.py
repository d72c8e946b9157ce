"""Issue 44 item 7: the Python API does what the CLI does in two more places. A dataset without
a column a reward reads is refused in `GSPOTrainer.__init__` (it failed after the first
generation in a 165-line traceback), and Ctrl-C in a script saves a checkpoint at the step's
end and raises TrainingInterrupted (it was a raw KeyboardInterrupt, nothing saved)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from transformers import TrainerCallback

from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.safety.interrupt import TrainingInterrupted
from gspo_trl.training.trainer import GSPOTrainer
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir

__all__ = ["single_torch_thread"]


def exact(completions: list[str], solution: list[str], **_: Any) -> list[float]:
    return [float(c.strip() == s) for c, s in zip(completions, solution, strict=True)]


def test_a_missing_reward_column_is_refused_in_init(tmp_path: Path) -> None:
    rows = Dataset.from_list([{"prompt": f"add {i} and 3", "answer": str(i + 3)} for i in range(8)])
    with pytest.raises(RecipeError) as refused:
        GSPOTrainer(
            model=str(tmp_path / "never-loaded"),
            reward_funcs=[exact, "math"],
            args=GSPOConfig(output_dir=str(tmp_path / "out"), report_to="none"),
            train_dataset=rows,
        )
    assert str(refused.value).startswith(
        "train_dataset has columns ['answer', 'prompt'], but reward_funcs[0] (exact) reads ['solution']; "
        "reward_funcs[1] (math) reads ['solution']: "
    )


class CtrlCAtStep(TrainerCallback):
    """A real SIGINT to this process as step `step` begins, as a terminal's Ctrl-C sends."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_in_a_script_saves_a_checkpoint_and_says_how_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    trainer = make_trainer(tiny_model_dir(tmp_path), out, n_prompts=16, max_steps=8)
    trainer.add_callback(CtrlCAtStep(1))
    with pytest.raises(TrainingInterrupted) as stopped:
        trainer.train()
    assert stopped.value.step == 2 and (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert str(stopped.value) == (
        f"stopped at step 2; checkpoint {out / 'checkpoint-2'} saved: continue with "
        "trainer.train(resume_from_checkpoint=True)"
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers given back
