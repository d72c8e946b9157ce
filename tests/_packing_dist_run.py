"""Two GSPOTrainer runs in one launch, padded then `packing: true`, on the same ranks and rollouts.

Launched by tests/training/test_packing_distributed.py with 2 gloo processes; reuses
tests/_gspo_dist_run.py's float64 run (deterministic completions of 2-12 tokens, so every
minibatch has padding) and writes both runs' logged metrics and final weights' distance.

    accelerate launch --num_processes 2 ... tests/_packing_dist_run.py OUT.json MODEL_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._gspo_dist_run import STEPS_PER_GENERATION, interleave, train


def main() -> int:
    import trl.trainer.grpo_trainer as grpo_module

    import gspo_trl.training.probes.packing as packing

    packing.MAX_PACKED_SHARE = 1.0  # pack every chunk, even one whose padding is little (rows of 7-19 tokens)

    out, model_dir = Path(sys.argv[1]), sys.argv[2]
    grpo_module.shuffle_sequence_dict = interleave(1, STEPS_PER_GENERATION)
    runs = [train(model_dir, out, 2, packing=on) for on in (False, True)]
    weights = [dict(run.model.named_parameters()) for run in runs]
    distance = max(float((p - weights[1][n]).abs().max()) for n, p in weights[0].items())
    moved = max(float(p.abs().max()) for p in weights[0].values())
    result = {
        "logs": [[e for e in run.state.log_history if "loss" in e] for run in runs],
        "weight_distance": distance,
        "world": runs[0].accelerator.num_processes,
        "largest_weight": moved,
    }
    if runs[0].accelerator.is_main_process:
        out.write_text(json.dumps(result))
    runs[0].accelerator.wait_for_everyone()
    from gspo_trl.train import release_process_group

    release_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
