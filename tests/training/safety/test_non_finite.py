"""A run that diverges stops at the step it did, with one line, and saves nothing of it.

A real run through `gspo-trl train` with learning_rate 1e6 (the issue's case): the old code
trained on, saved checkpoints and a final model of inf/NaN weights and exited 0 ("done: 8
steps"). Now it exits 2 naming the step; the checkpoint saved before it is kept as written,
and no later checkpoint, final model or trainer state is written.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file

from gspo_trl.cli.main import main as gspo_trl_main
from tests._gspo_helpers import tiny_model_dir
from tests.training.safety.test_faults import snapshot
from tests.training.test_distributed import write_mini_recipe


def _finite(weights_file: Path) -> bool:
    import torch

    return all(bool(torch.isfinite(tensor).all()) for tensor in load_file(weights_file).values())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_diverging_run_stops_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path, capsys) -> None:
    recipe = write_mini_recipe(tmp_path, tiny_model_dir(tmp_path))
    out = tmp_path / "run"
    argv = ["train", str(recipe), "--output_dir", str(out), "--learning_rate", "1e6", "--max_steps", "8"]
    argv += ["--save_steps", "1", "--steps_per_generation", "2"]
    status = gspo_trl_main(argv)
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    step = int(re.search(r"training diverged at step (\d+): ", errors[0]).group(1))
    assert "inf or NaN" in errors[0] and "learning_rate" in errors[0], errors[0]
    checkpoints = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert checkpoints == list(range(1, step)), f"checkpoints {checkpoints} for a run diverging at {step}"
    assert not (out / "model.safetensors").exists() and not (out / "trainer_state.json").exists()
    if checkpoints:
        kept = out / f"checkpoint-{checkpoints[-1]}"
        assert f"{kept} is kept as it was" in errors[0], errors[0]
        assert _finite(kept / "model.safetensors")
        before = snapshot(kept)
        assert gspo_trl_main([*argv, "--resume"]) == 2  # the same settings diverge again
        assert "training diverged at step" in capsys.readouterr().err
        assert snapshot(kept) == before, "a resumed divergence wrote over the last good checkpoint"


def _scaled_run(tmp_path: Path, overflow_steps: set[int], max_steps: int):
    """A GSPOTrainer on the tiny model with a real loss scaler (torch's GradScaler, which accelerate
    builds only for fp16 on a GPU, here on the CPU) and the gradients of `overflow_steps`' backward
    passes made inf, as an fp16 overflow makes them: the scaler skips those steps and the Trainer
    logs their grad norm as inf."""
    import torch

    from tests._gspo_helpers import make_trainer

    trainer = make_trainer(
        tiny_model_dir(tmp_path),
        tmp_path / "run",
        max_steps=max_steps,
        per_device_train_batch_size=4,
        max_completion_length=4,
    )
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu")
    weight = trainer.model.get_input_embeddings().weight
    weight.register_hook(
        lambda grad: grad * float("inf") if trainer.state.global_step in overflow_steps else grad
    )
    return trainer


def test_an_fp16_scaler_skip_is_not_divergence_but_too_many_in_a_row_are(tmp_path, monkeypatch) -> None:
    """fp16 x the non-finite stop: a GradScaler-skipped step logs grad_norm inf, which stopped a
    healthy run as divergence at step 1. One skip trains on; more than MAX_SKIPPED_STEPS in a row
    (2 here, to keep the run short; 16 in a run) stop it with one line."""
    from gspo_trl.core.errors import NonFiniteTrainingError
    from gspo_trl.training.probes import non_finite

    trainer = _scaled_run(tmp_path / "once", {0}, max_steps=2)
    trainer.train()
    norms = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    assert norms[0] == float("inf") and all(map(math.isfinite, norms[1:])), norms
    assert trainer.state.global_step == 2
    monkeypatch.setattr(non_finite, "MAX_SKIPPED_STEPS", 2)
    trainer = _scaled_run(tmp_path / "always", set(range(4)), max_steps=4)
    with pytest.raises(NonFiniteTrainingError, match="skipped 3 optimizer steps in a row"):
        trainer.train()
    assert trainer.state.global_step == 3


def test_a_weight_made_nan_between_scans_is_caught_before_the_next_save(tmp_path) -> None:
    """The weights are scanned on saving steps (and every SCAN_EVERY_STEPS), not every step: a
    weight made NaN directly (no gradient, no log to show it) at step 1 stops the run at step 3,
    its first save, and checkpoint-3 is never written."""
    import torch
    from transformers import TrainerCallback

    from gspo_trl.core.errors import NonFiniteTrainingError
    from gspo_trl.training.probes.non_finite import SCAN_EVERY_STEPS
    from tests._gspo_helpers import make_trainer

    assert SCAN_EVERY_STEPS > 3  # step 1 and 2 are not scanned: the save at 3 must catch it
    out = tmp_path / "run"
    trainer = make_trainer(
        tiny_model_dir(tmp_path),
        out,
        max_steps=6,
        per_device_train_batch_size=4,
        max_completion_length=4,
        logging_steps=100,
        save_strategy="steps",
        save_steps=3,
    )

    class PoisonAtStep1(TrainerCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            if state.global_step == 0:  # the optimizer step that becomes step 1
                with torch.no_grad():
                    trainer.model.get_input_embeddings().weight[0, 0] = float("nan")

    trainer.add_callback(PoisonAtStep1())
    with pytest.raises(NonFiniteTrainingError, match="at step 3: the weights hold inf or NaN"):
        trainer.train()
    assert not list(out.glob("checkpoint-*")), "a checkpoint of NaN weights was saved"
