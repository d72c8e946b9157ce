"""What the one-GPU scripts share (scripts/gpu_smoke.py, scripts/gpu_bench.py): locally built
Qwen3-shaped models, the recipe keys of a one-GPU run, the CUDA check, and the plan of a run.

The architectures are read from gspo_trl/plan/model_configs/*.json, the plan's own copies of the
hub configs, so a script's model and the plan's figures for it come from one file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DECODER_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)
"""The decoder's shape: the fields gspo_trl.model.tiny.dense.TinyModelSpec and config.json share."""


def shipped_config(hub_id: str) -> dict[str, Any]:
    """The plan's shipped config.json of `hub_id` (`Qwen/Qwen3-0.6B`), as a dict."""
    from gspo_trl.plan.model_shape import shipped_models

    return json.loads(shipped_models()[hub_id].read_text())


def decoder_fields(config: dict[str, Any]) -> dict[str, int]:
    """The decoder fields of a config.json: TinyModelSpec keyword arguments."""
    return {field: config[field] for field in DECODER_FIELDS}


SAVED_DTYPE = "bfloat16"
"""What the random models are saved in: half float32's bytes to write and read back (Qwen3-1.7B:
3.4 GB, not 6.9), and nothing lost, since the runs load them at their recipe's dtype (float32
weights under bf16 autocast on the GPU, gspo_trl.model.loading.precision) and every bf16 value is
exact in float32; only the random init's own values are rounded, which a throughput or memory
figure does not see."""


def build_model(output_dir: Path, name: str, spec: Any, dry_run: bool) -> Path:
    """Save a random-init model of `spec` (gspo_trl.model.tiny.dense) with the tiny tokenizer to
    output_dir/name in SAVED_DTYPE, once: a later run reuses it. Initialised on the GPU unless
    `dry_run`: a CPU took 46 s to build and save Qwen3-0.6B (2 shared cores at load ~3)."""
    from gspo_trl.model.tiny.dense import save_tiny_model

    path = output_dir / name
    if not (path / "config.json").is_file():
        save_tiny_model(path, spec, device="cpu" if dry_run else "cuda", dtype=SAVED_DTYPE)
    return path


def one_gpu_parser(doc: str, output_dir: str, dry_run_help: str) -> argparse.ArgumentParser:
    """The options both scripts take: --dry-run, --batch, --completion, --output-dir."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help=dry_run_help)
    parser.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size")
    parser.add_argument("--completion", type=int, default=512, help="tokens in every completion")
    parser.add_argument("--output-dir", default=output_dir)
    return parser


def cuda_missing(tool: str) -> bool:
    """True, after one line on stderr, where torch sees no CUDA GPU (the caller exits 2)."""
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{tool}: no CUDA GPU here; use --dry-run on CPU", file=sys.stderr)
    return True


def run_overrides(model_dir: Path, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """Recipe keys of one run on the synthetic digit reversal: bf16 with gradient checkpointing
    on the GPU, float32 on the CPU for --dry-run; `args` has dry_run, batch, completion, steps.

    Every completion is exactly max_completion_length tokens, whatever the weights say:
    TRL's transformers path builds its GenerationConfig from `generation_kwargs`
    (trl/trainer/grpo_trainer.py:1171-1173, `generation_kwargs.update(args.generation_kwargs)`),
    and transformers adds a `MinNewTokensLengthLogitsProcessor` for `min_new_tokens`
    (transformers/generation/utils.py:1355-1366), which sets the EOS scores to -inf until that
    many tokens are new (`class MinNewTokensLengthLogitsProcessor(LogitsProcessor):`,
    transformers/generation/logits_process.py:164-175). With vLLM the same dict would go to
    SamplingParams, which names this `min_tokens`: these scripts never use vLLM.
    """
    return {
        "model": {"name_or_path": str(model_dir), "dtype": "float32" if args.dry_run else "bfloat16"},
        "data": {
            "path": "synthetic:reversal",
            "num_rows": 64 if args.dry_run else 512,
            "solution_column": "solution",
        },
        "rewards": ["gspo_trl.data.synthetic:digit_reversal_reward"],
        "per_device_train_batch_size": args.batch,
        "num_generations": 8,
        "max_completion_length": args.completion,
        "generation_kwargs": {"min_new_tokens": args.completion},
        "gradient_checkpointing": True,
        "bf16": not args.dry_run,
        "use_cpu": args.dry_run,
        "max_steps": args.steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "learning_rate": 1e-6,
        "output_dir": str(run_dir),
        "seed": 0,
    }


def longest_prompt(trainer: Any) -> int:
    """Tokens of the longest chat-templated prompt: what the plan takes as max_prompt_length."""
    tokenizer = trainer.processing_class
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in trainer.train_dataset["prompt"]
    ]
    return max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)


def plan_run(recipe: Any, model_dir: Path, prompt: int, rates: Any = None) -> Any:
    """`gspo-trl plan` of this one-GPU run (gspo_trl.plan.plan), prompts `prompt` tokens long;
    `rates` (a gspo_trl.model.sizing.gpu_rates row) sets the GPU's memory, peak and bandwidth, else the
    plan's defaults."""
    from gspo_trl.plan import plan

    hardware = {}
    if rates is not None:
        hardware = {
            "gpu_memory_gb": rates.memory_gb,
            "peak_tflops": rates.bf16_dense_tflops,
            "bandwidth_tb_s": rates.bandwidth_tb_s,
            # its measured usable memory: gspo_trl.model.sizing.gpu_rates.reported_gib
            "gpu_name": rates.name,
        }
    return plan(
        {**recipe.training, "max_prompt_length": prompt},
        str(model_dir),
        strategy="ddp",
        nodes=1,
        gpus_per_node=1,
        lora=recipe.model.lora,
        dtype=recipe.model.dtype,
        allow_pure_bf16=recipe.model.allow_pure_bf16,
        **hardware,
    )
