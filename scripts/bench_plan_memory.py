"""Measure the tiny model's training-step memory on CPU and print `gspo-trl plan`'s prediction beside it.

    python scripts/bench_plan_memory.py [--batch 16] [--prompt 64] [--completion 448] [--checkpointing both]

Each setting runs in a fresh subprocess: load the tiny model (gspo_trl.model.tiny.dense, fp32), patch
it with TRL's fused LM head exactly as GRPOTrainer does, and take one step of the per-token
log-prob loss on batch x (prompt + completion) tokens (completion tokens scored) with torch
AdamW. The measured figure is the peak resident set (VmHWM, reset just before) during the step minus
the resident set just before it (model and inputs loaded): gradients, AdamW moments, saved
activations, the backward's buffers and the fused head's, which is what the plan predicts for
the same settings (weights, AdamW's moments, allocated by a small warm-up step, and the
CUDA-context estimate left out). tracemalloc does not see torch's allocations. Rows are
right-padded like TRL's batches, so transformers builds its 4-D attention mask.

CPU attention (SDPA's flash kernel for CPU, no padding) stores what the GPU kernels store, but
the CPU allocator and glibc round and cache differently, so read the ratio as a sanity band,
not a calibration.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

PLANNED_TERMS = ("gradients", "activations", "logits")
PAD_FRACTION = 8
"""1/8 of each row's completion is right padding, as in TRL's batches (so the 4-D mask is built)."""


def rss_bytes() -> int:
    """Current resident set of this process, from /proc (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize()


def reset_peak_rss() -> bool:
    """Start this process's peak-resident-set counter (VmHWM) afresh at the current resident set.

    getrusage's ru_maxrss would not do: Linux carries the peak of the image a process replaced
    at exec into it, so a child of a large process (a long pytest session, 1 GiB) reports the
    parent's peak as its own (the checkpointed step read 2.2x the plan in the full suite, 0.90
    alone; tests/plan/test_plan_cpu_memory.py holds a 1 GiB ballast to show it). False where
    /proc/self/clear_refs is not writable: VmHWM is then this image's peak since exec."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int:
    """Peak resident set since `reset_peak_rss` (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child(model_dir: str, batch: int, prompt: int, completion: int, checkpointing: bool) -> dict[str, int]:
    """One training step in this (fresh) process; returns its baseline and peak resident bytes."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    length = prompt + completion
    input_ids = torch.randint(0, model.config.vocab_size, (batch, length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1:, length - completion // PAD_FRACTION :] = 0
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :prompt] = -100
    # A small warm-up step does torch's lazy setup and allocates AdamW's moments, which persist
    # from step to step like the weights: the baseline holds both, the plan counts the rest.
    warm = input_ids[:1, :8]
    model(input_ids=warm, labels=warm, fused_lm_head=True).log_probs.sum().backward()
    optimizer.step()
    model.zero_grad(set_to_none=True)
    baseline = rss_bytes()
    reset_peak_rss()
    outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    loss = -outputs.log_probs[:, -completion:].mean()
    loss.backward()
    optimizer.step()
    peak = peak_rss_bytes()
    return {"baseline": baseline, "peak": peak}


def predicted_bytes(model_dir: str, batch: int, prompt: int, completion: int, checkpointing: bool) -> int:
    """The plan's gradients + activations + logits for the same step (1 process, fp32)."""
    from gspo_trl.plan import plan

    training = {
        "per_device_train_batch_size": batch,
        "max_prompt_length": prompt,
        "max_completion_length": completion,
        "gradient_checkpointing": checkpointing,
        "bf16": False,
    }
    result = plan(training, model_dir, strategy="ddp", nodes=1, gpus_per_node=1, dtype="float32")
    return sum(t.bytes for t in result.terms if t.name.startswith(PLANNED_TERMS))


def measure(
    model_dir: str, batch: int, prompt: int, completion: int, checkpointing: bool
) -> dict[str, float]:
    """Run `child` in a fresh interpreter and compare its step's memory with the plan's."""
    command = [sys.executable, __file__, "--child", model_dir, "--batch", str(batch), "--prompt", str(prompt)]
    command += ["--completion", str(completion), "--checkpointing", "on" if checkpointing else "off"]
    # A fixed mmap threshold: glibc's dynamic one would keep freed tensors on the heap and count
    # fragmentation as peak; 64 KiB and up then come from mmap and go back when freed.
    # The child measures in a clean environment: what earlier work in this process put into
    # os.environ must not change the allocator or torch there (vLLM-CPU's platform, once
    # imported, sets LD_PRELOAD, thread and inductor variables: vllm/platforms/cpu.py).
    kept = ("PATH", "HOME", "TMPDIR", "PYTHONPATH", "HF_HUB_OFFLINE", "OMP_NUM_THREADS")
    env = {k: os.environ[k] for k in kept if k in os.environ}
    env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"measurement subprocess failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    measured = result["peak"] - result["baseline"]
    predicted = predicted_bytes(model_dir, batch, prompt, completion, checkpointing)
    return {"measured": measured, "predicted": predicted, "ratio": measured / predicted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=448)
    parser.add_argument("--checkpointing", choices=("on", "off", "both"), default="both")
    parser.add_argument("--model-dir", help="an already built tiny model (default: build one)")
    parser.add_argument("--child", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        step = child(args.child, args.batch, args.prompt, args.completion, args.checkpointing == "on")
        print(json.dumps(step))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model_dir
        if model_dir is None:
            from gspo_trl.model.tiny.dense import save_tiny_model

            model_dir = str(save_tiny_model(Path(scratch) / "tiny"))
        settings = (True, False) if args.checkpointing == "both" else (args.checkpointing == "on",)
        tokens = args.batch * (args.prompt + args.completion)
        print(f"tiny model, fp32, CPU, {args.batch} x ({args.prompt} + {args.completion}) = {tokens} tokens")
        print(f"{'gradient_checkpointing':24s} {'measured MiB':>13s} {'plan MiB':>10s} {'ratio':>7s}")
        for checkpointing in settings:
            row = measure(model_dir, args.batch, args.prompt, args.completion, checkpointing)
            print(
                f"{str(checkpointing).lower():24s} {row['measured'] / 2**20:13.1f} "
                f"{row['predicted'] / 2**20:10.1f} {row['ratio']:7.2f}"
            )
            print(json.dumps({"checkpointing": checkpointing, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
