"""A GSPOTrainer run whose global batches do not depend on the number of processes.

Launched by tests/training/test_diagnostics_distributed.py twice - once with 2 gloo processes
(per-device batch 4) and once in 1 process (per-device batch 8) - to check that the gathered
gspo/* statistics are the same. Two things normally differ between the layouts and are
pinned here, without touching the loss:
- generation: a deterministic `rollout_func` (TRL's public hook) makes each completion a
  function of its prompt and its index within the group;
- minibatch composition: TRL shuffles each rank's rollout batch before splitting it into
  `steps_per_generation` minibatches. Here the shuffle is replaced by the permutation that
  makes one process build, for minibatch k, exactly the rows the W ranks hold for their
  minibatch k (identity when the real world size is W).

    python tests/_gspo_dist_run.py OUT.json MODEL_DIR [--moe-model DIR] --emulate-world 2
    accelerate launch --multi_gpu --num_processes 2 ... tests/_gspo_dist_run.py OUT.json MODEL_DIR [...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import torch

from gspo_trl.training.probes.diagnostics import DiagnosticsProbe

GLOBAL_BATCH, GROUP, STEPS_PER_GENERATION = 8, 4, 4


def interleave(world: int, steps: int):
    """A shuffle_sequence_dict replacement: one process emulating `world` ranks' minibatches."""

    def permute_dict(seq_dict: dict) -> dict:
        n = len(next(v for v in seq_dict.values() if v is not None))
        shard, chunk = n // world, n // (world * steps)
        order = [w * shard + k * chunk + i for k in range(steps) for w in range(world) for i in range(chunk)]

        def permute(v):
            if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
                return v
            return v[torch.tensor(order)] if isinstance(v, torch.Tensor) else [v[i] for i in order]

        return {key: permute(val) for key, val in seq_dict.items()}

    return permute_dict


def deterministic_rollout(prompts: list, trainer) -> dict:
    """Completions drawn from a PRNG seeded by (prompt, index in group): layout-independent."""
    tokenizer = trainer.processing_class
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    completion_ids, seen = [], {}
    for prompt in prompts:
        index = seen.get(prompt, 0)
        seen[prompt] = index + 1
        rng = random.Random(f"{prompt}|{index}")
        length = rng.randint(2, 12)
        completion_ids.append([rng.randrange(3, len(tokenizer)) for _ in range(length)])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def reward(completions: list[str], **_) -> list[float]:
    return [(sum(map(ord, c)) % 11) / 10.0 for c in completions]


def train(model_dir: str, out: Path, world: int, moe: dict | None = None, packing: bool = False):
    """One GSPOTrainer run on `model_dir` (in float64, see below); returns the trainer."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    config = GSPOConfig(
        diagnostics={"length_buckets": [6]},
        output_dir=str(out.parent / f"run-w{world}-{Path(model_dir).name}{'-packed' * packing}"),
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=GLOBAL_BATCH // world,
        num_generations=GROUP,
        steps_per_generation=STEPS_PER_GENERATION,  # GSPO's loss, beta 0 and ratio level: the defaults
        epsilon=3e-3,
        epsilon_high=4e-3,
        learning_rate=2.0,
        optim="sgd",  # Adam turns float-level noise in tiny gradients into full-size steps
        max_steps=8,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        max_completion_length=12,
        dataloader_num_workers=0,
        moe=moe,
        packing=packing,
    )
    experts = {"experts_implementation": "eager"} if moe else {}
    trainer = GSPOTrainer(
        # float64: the policy gradient sums terms of both advantage signs that nearly cancel, so
        # float32 summation order (8 rows vs 4 + 4 all-reduced) alone moves the update by ~0.2%
        # (MoE: transformers' default grouped_mm experts refuse float64; the eager loop takes it)
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, **experts),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": f"add {i} and {i + 3}"} for i in range(64)]),
        rollout_func=deterministic_rollout,
    )
    trainer.probes.find(DiagnosticsProbe).row_sink = []
    trainer.train()
    return trainer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("model_dir")
    parser.add_argument("--moe-model", help="also train this mixture-of-experts model (routing metrics)")
    parser.add_argument("--emulate-world", type=int, default=1)
    args = parser.parse_args()

    import trl.trainer.grpo_trainer as grpo_module

    world = int(os.environ.get("WORLD_SIZE", "1"))  # PartialState() is not set up before the config
    grpo_module.shuffle_sequence_dict = interleave(args.emulate_world, STEPS_PER_GENERATION)
    out = Path(args.out)
    trainer = train(args.model_dir, out, world)
    result = {
        "world": world,
        "logs": [e for e in trainer.state.log_history if "loss" in e],
        "rows": [(mb, r.tolist()) for mb, r in trainer.probes.find(DiagnosticsProbe).row_sink],
    }
    if args.moe_model:  # in the same launch: a second launch would cost more than the run
        moe = train(args.moe_model, out, world, moe={"routing_replay": "old"})
        result["moe_logs"] = [e for e in moe.state.log_history if "loss" in e]
    if trainer.accelerator.is_main_process:
        out.write_text(json.dumps(result))
    trainer.accelerator.wait_for_everyone()
    from gspo_trl.train import release_process_group

    release_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
