"""A run that diverges stops at the step it did, with one line, and saves nothing of it.

A real run through `gspo-trl train` with learning_rate 1e6 (the issue's case): the old code
trained on, saved checkpoints and a final model of inf/NaN weights and exited 0 ("done: 8
steps"). Now it exits 2 naming the step; the checkpoint saved before it is kept as written,
and no later checkpoint, final model or trainer state is written.
"""

from __future__ import annotations

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
